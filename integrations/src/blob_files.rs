//! Files a user names stored as blobs (`jp-store blob put`): each read as
//! [`crate::user_file`] reads them (a regular file within the store's
//! maximum blob size, refused before it is read otherwise), one file as a
//! loose object, several as one pack (one sync for the batch).

use jpstore_engine::internal::StoreInterior as _;
use std::path::{Path, PathBuf};

use jpstore_blobstore::BlobId;
use jpstore_engine::Store;

use crate::user_file::{self, LastLink};

/// A file stored: what `jp-store blob put --json` prints for each.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StoredFile {
    /// The file, as named (lossy UTF-8 when serialized).
    #[serde(serialize_with = "lossy_path")]
    pub path: PathBuf,
    /// The blob holding its content.
    pub id: BlobId,
    /// Bytes of its content.
    pub size: u64,
}

/// Progress of [`put_files`] storing several files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutProgress {
    /// Raw bytes stored so far.
    pub bytes_done: u64,
    /// Raw bytes of all the files, from their sizes before they are read
    /// (a file whose size cannot be had counts as 0).
    pub bytes_total: u64,
}

/// Why files could not be stored. Nothing is stored when one of several
/// files cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PutFilesError {
    /// The one file named could not be read (the error names it).
    #[error(transparent)]
    Read(#[from] jpstore_engine::error::Error),
    /// The blob store failed to store the one file.
    #[error(transparent)]
    Store(#[from] jpstore_blobstore::Error),
    /// The batch of several files failed: a file could not be read (its
    /// path is in the message) or the store failed.
    #[error("storing the batch: {0}")]
    Batch(#[source] jpstore_blobstore::Error),
    /// The store returned another number of ids than files were given.
    #[error("the store returned {ids} ids for {files} files")]
    Count {
        /// Ids returned.
        ids: usize,
        /// Files given.
        files: usize,
    },
}

/// Stores `files` in the blob store of `store`: a single file as a loose
/// object, several as one pack, `progress` told as the pack grows. Returns
/// each file with its blob, in the order given. (No conversation references
/// them: gc spares them for its grace period only.)
pub fn put_files(
    store: &Store,
    files: &[PathBuf],
    progress: &mut dyn FnMut(PutProgress),
) -> Result<Vec<StoredFile>, PutFilesError> {
    let store = store.blobs();
    let max = store.options().max_blob_len;
    if let [file] = files {
        let data = user_file::read_file(file, max, LastLink::Follow)?;
        let out = store.put(&data)?;
        return Ok(vec![StoredFile {
            path: file.clone(),
            id: out.id,
            size: data.len() as u64,
        }]);
    }
    let bytes_total: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    let outcome = store
        .put_batch(
            files.len(),
            |i| {
                user_file::read(&files[i], max, LastLink::Follow).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("{}: {e}", files[i].display()))
                })
            },
            &mut |p| {
                progress(PutProgress {
                    bytes_done: p.bytes_done,
                    bytes_total,
                })
            },
        )
        .map_err(PutFilesError::Batch)?;
    if outcome.ids.len() != files.len() {
        return Err(PutFilesError::Count {
            ids: outcome.ids.len(),
            files: files.len(),
        });
    }
    Ok(files
        .iter()
        .zip(outcome.ids.into_iter().zip(outcome.sizes))
        .map(|(path, (id, size))| StoredFile {
            path: path.clone(),
            id,
            size,
        })
        .collect())
}

/// A path as its lossy UTF-8 form.
fn lossy_path<S: serde::Serializer>(path: &Path, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(&path.display())
}

#[cfg(test)]
mod tests {
    use super::*;
    use jpstore_engine::StoreOptions;

    #[test]
    fn one_file_is_a_loose_object_and_several_one_pack_in_the_order_given() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::init_dir(&dir.path().join("s"), StoreOptions::default()).expect("init");
        let paths: Vec<PathBuf> = ["a", "b", "c"]
            .iter()
            .map(|n| {
                let p = dir.path().join(n);
                std::fs::write(&p, format!("content of {n}")).expect("write");
                p
            })
            .collect();
        let one = put_files(&store, &paths[..1], &mut |_| {}).expect("put one");
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].size, 12);
        assert_eq!(store.blobs().get(&one[0].id).expect("get"), b"content of a");
        assert_eq!(store.blobs().packs().expect("packs").len(), 0);

        let mut last = None;
        let all = put_files(&store, &paths, &mut |p| last = Some(p)).expect("put all");
        assert_eq!(
            all.iter().map(|f| &f.path).collect::<Vec<_>>(),
            paths.iter().collect::<Vec<_>>()
        );
        assert_eq!(store.blobs().get(&all[2].id).expect("get"), b"content of c");
        assert_eq!(store.blobs().packs().expect("packs").len(), 1);
        assert_eq!(last.map(|p| p.bytes_total), Some(36));
        let json = serde_json::to_value(&all[1]).expect("json");
        assert_eq!(json["path"], paths[1].display().to_string());
        assert_eq!(json["id"], all[1].id.to_hex());
    }

    #[test]
    fn a_file_that_cannot_be_read_among_several_stores_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::init_dir(&dir.path().join("s"), StoreOptions::default()).expect("init");
        let good = dir.path().join("good");
        std::fs::write(&good, "good").expect("write");
        let missing = dir.path().join("missing");
        let e = put_files(&store, &[good, missing.clone()], &mut |_| {}).expect_err("refused");
        assert!(matches!(e, PutFilesError::Batch(_)), "{e:?}");
        let message = e.to_string();
        assert!(
            message.starts_with("storing the batch: ")
                && message.contains(&missing.display().to_string()),
            "{message}"
        );
        assert!(store.blobs().ids().expect("ids").is_empty());
    }
}
