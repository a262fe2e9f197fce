//! The `jp-store` package's integration tests: the binary as cargo built
//! it (`CARGO_BIN_EXE_jp-store`).
//!
//! The end-to-end tests of the command are in the `jpstore-tests` crate
//! (`tests/tests/it/`), which runs the same binary: cargo builds a
//! package's binaries only for that package's integration tests, so this
//! test binary is also what makes `cargo test` build `jp-store` for them,
//! in the same build as everything else (`jpstore_tests::jp_store_bin`).

use std::process::Command;

/// `jp-store --version` names the command and the version of its package,
/// and the binary the tests of the workspace run is this one, beside the
/// test executables (`<target>/<profile>/jp-store`).
#[test]
fn the_built_binary_says_its_version() {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_jp-store"));
    let out = Command::new(bin)
        .arg("--version")
        .output()
        .expect("run jp-store --version");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("jp-store {}\n", env!("CARGO_PKG_VERSION"))
    );
    let test_exe = std::env::current_exe().expect("the test executable");
    let profile_dir = test_exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test executable is in <target>/<profile>/deps");
    assert_eq!(
        bin.parent(),
        Some(profile_dir),
        "where jpstore_tests::jp_store_bin looks for it"
    );
}
