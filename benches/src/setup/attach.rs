//! Generated source trees on disk, and attaching them.

use std::path::{Path, PathBuf};

use jpstore_engine::conversation::ConversationId;
use jpstore_engine::{NewConversation, Store};
use jpstore_integrations::attach::{self, AttachOutcome};
use tempfile::TempDir;

use crate::workload::source_tree::{write_to_dir, GeneratedFile, SourceTree};

/// `files` files of the default [`SourceTree`] from `seed`, in memory and
/// written to `dir` (replacing what was there).
pub fn write_tree(seed: u64, files: usize, dir: &Path) -> Vec<GeneratedFile> {
    let generated = SourceTree::generate(seed, files);
    if dir.exists() {
        std::fs::remove_dir_all(dir).expect("remove the old tree");
    }
    write_to_dir(&generated, dir).expect("write the tree");
    generated
}

/// A fresh store below `root` holding one empty conversation.
pub fn store_with_conversation(root: &Path) -> (TempDir, Store, ConversationId) {
    let (dir, store) = super::fresh_store(root);
    let id = store
        .create(NewConversation::default())
        .expect("create conversation")
        .id()
        .clone();
    (dir, store, id)
}

/// `attach::collect` of `tree` plus `attach::attach` (strict), as
/// `jp-store attach ID DIR` does; checks that `files` files were attached.
pub fn collect_and_attach(
    tree: &Path,
    store: &Store,
    id: &ConversationId,
    files: usize,
) -> AttachOutcome {
    let (collected, errors) =
        attach::collect(&[tree.to_path_buf()], tree, attach::Links::default());
    assert!(errors.is_empty(), "{errors:?}");
    let out = attach::attach(
        store,
        id,
        &collected,
        Some("the tree".into()),
        true,
        &mut |_| {},
    )
    .expect("attach");
    assert_eq!(out.files, files);
    out
}

/// The paths of `files` below `dir`, for floors that read the tree.
pub fn paths(files: &[GeneratedFile], dir: &Path) -> Vec<PathBuf> {
    files.iter().map(|f| dir.join(&f.path)).collect()
}
