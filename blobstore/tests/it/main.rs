//! The blob store's integration tests, in one test binary (each test
//! binary links the crate and its dependencies once): a module per area.
//! They share one process and run on parallel threads; a test that needs
//! processes of its own starts this binary again on one of its tests
//! (`--exact`, with the test's full path).
//!
//! Run one module with `cargo test -p jpstore-blobstore --test it crash::`.

mod blobstore;
mod crash;
mod object_store;
mod v1_pack;
