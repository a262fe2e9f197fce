//! The integration tests of JP's storage backend over jp-store, in one test
//! binary (each test binary links JP's crates and ours once): a module per
//! area, `common` the helpers they share. They share one process and run on
//! parallel threads; the crash test starts this binary again on its child
//! test (`--exact`, with the test's full path), and the S3 tests share one
//! test server, each on a prefix of its own.
//!
//! Run one module with `cargo test --test it crash::` (from `jp-backend/`,
//! with `--config ../../shared/jp/cargo-config.toml` offline).

mod common;

mod backend_parity;
mod crash;
mod differential;
mod jp_oracle;
mod listing;
mod moving_in;
mod unwritable;
mod workspace;
mod writers;
