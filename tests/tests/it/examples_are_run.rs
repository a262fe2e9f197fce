//! Every example program of every crate is run by `cargo test`.
//!
//! Cargo builds the files of a crate's `examples/` during `cargo test` but
//! does not run them. The crates declare each example with `test = true`
//! in their `Cargo.toml` (`[[example]]`), so that `cargo test` builds it
//! with the test harness and runs its `#[test]`s, which call the same code
//! as its `main` (see the comment in `engine/Cargo.toml`). An example added
//! without that declaration would be compiled and never run: this test
//! fails on one.

use std::path::{Path, PathBuf};

/// The workspace's root directory.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is in the workspace")
        .to_path_buf()
}

/// The names of the `[[example]]` sections of a manifest that set
/// `test = true`.
fn examples_run_as_tests(manifest: &str) -> Vec<String> {
    let mut tested = Vec::new();
    // Each `[[example]]` section, up to the next section header.
    for section in manifest.split("\n[").skip(1) {
        let Some(body) = section.strip_prefix("[example]]") else {
            continue;
        };
        let value = |key: &str| {
            body.lines().find_map(|line| {
                let (k, v) = line.split_once('=')?;
                (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
            })
        };
        if let (Some(name), Some(test)) = (value("name"), value("test")) {
            if test == "true" {
                tested.push(name);
            }
        }
    }
    tested
}

#[test]
fn every_example_is_declared_to_run_as_a_test_and_has_one() {
    let root = workspace();
    let mut examples = 0;
    for krate in ["blobstore", "engine", "integrations", "cli"] {
        let dir = root.join(krate).join("examples");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let manifest = std::fs::read_to_string(root.join(krate).join("Cargo.toml"))
            .expect("read the crate's manifest");
        let tested = examples_run_as_tests(&manifest);
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .expect("a UTF-8 file name");
            assert!(
                tested.iter().any(|t| t == name),
                "{krate}/examples/{name}.rs: no `[[example]] name = \"{name}\"` with `test = true` in {krate}/Cargo.toml, so `cargo test` would build it and never run it"
            );
            let source = std::fs::read_to_string(&path).expect("read the example");
            assert!(
                source.contains("#[test]"),
                "{krate}/examples/{name}.rs: no #[test], so `cargo test` runs nothing of it"
            );
            examples += 1;
        }
    }
    assert!(examples >= 3, "found {examples} examples");
}

#[test]
fn the_manifest_reader_finds_only_examples_that_set_test() {
    let manifest = "[package]\nname = \"x\"\n\n[[example]]\nname = \"a\"\ntest = true\n\n\
                    [[example]]\nname = \"b\"\n\n[[bench]]\nname = \"c\"\ntest = true\n";
    assert_eq!(examples_run_as_tests(manifest), ["a"]);
}
