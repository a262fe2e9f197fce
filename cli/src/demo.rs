//! `jp-store demo`: the main job on the embedded sample workspace.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{ensure, Context, Result};
use jpstore_blobstore::BlobId;

use crate::blob_commands::open_blobs;

/// The sample JP workspace shipped with jp-store (written for it), embedded
/// in the binary: (path inside the workspace, content).
pub const SAMPLE_WORKSPACE: &[(&str, &str)] = &[
    (
        ".jp/conversations/17738399468-fix-the-flaky-test/events.json",
        include_str!("../samples/jp-workspace/.jp/conversations/17738399468-fix-the-flaky-test/events.json"),
    ),
    (
        ".jp/conversations/17738399468-fix-the-flaky-test/metadata.json",
        include_str!("../samples/jp-workspace/.jp/conversations/17738399468-fix-the-flaky-test/metadata.json"),
    ),
];

pub fn run(dir: Option<PathBuf>) -> Result<ExitCode> {
    let (dir, _guard) = match dir {
        Some(d) => (d, None),
        None => {
            let t = tempfile::tempdir().context("creating a temp dir for the demo store")?;
            (t.path().join("store"), Some(t))
        }
    };
    let store = open_blobs(&dir, true)?;
    println!("store: {}", dir.display());
    let contents: Vec<&[u8]> = SAMPLE_WORKSPACE.iter().map(|(_, c)| c.as_bytes()).collect();
    let batch = store.put_batch(contents.len(), |i| Ok(contents[i].to_vec()), &mut |_| {})?;
    for ((path, content), id) in SAMPLE_WORKSPACE.iter().zip(&batch.ids) {
        let back = store.get(id)?;
        ensure!(
            back == content.as_bytes(),
            "blob {id} read back differently"
        );
        ensure!(
            *id == BlobId::of(content.as_bytes()),
            "blob id of {path} is not its SHA-256"
        );
        println!("{id}  {:>6} bytes  {path}", content.len());
    }
    println!(
        "stored {} files ({} bytes) as {} new objects in a pack of {} bytes",
        SAMPLE_WORKSPACE.len(),
        batch.raw_bytes,
        batch.new_objects,
        batch.pack_bytes
    );
    let report = store.verify_all(&mut |_| {})?;
    ensure!(
        report.is_clean(),
        "verify found damage: {:?}",
        report.problems
    );
    println!(
        "verified {} objects in {} pack(s): clean",
        report.packed_objects + report.loose_objects,
        report.packs
    );
    Ok(ExitCode::SUCCESS)
}
