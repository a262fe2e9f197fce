//! `cargo test-all` (the alias `.cargo/config.toml` defines, and README.md's
//! test command): `cargo test --workspace` with the arguments given, then
//! one line counting the tests that were skipped for want of an S3 server,
//! Chromium, root or a user that is not root, with what to install (none in
//! CI, where such tests fail instead: `jpstore_test_env`). Its exit status
//! is that of `cargo test`.

use std::process::{Command, ExitCode};

use jpstore_test_env::{recorded, summary, SKIPS_VAR};

fn main() -> ExitCode {
    let dir = std::env::temp_dir().join(format!("jpstore-test-skips-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("test-all: cannot create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["test", "--workspace"])
        .args(std::env::args_os().skip(1))
        .env(SKIPS_VAR, &dir)
        .status();
    let skips = recorded(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    println!("{}", summary(&skips));
    match status {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => ExitCode::from(u8::try_from(s.code().unwrap_or(101)).unwrap_or(101)),
        Err(e) => {
            eprintln!("test-all: cannot run cargo test: {e}");
            ExitCode::FAILURE
        }
    }
}
