//! The end-to-end tests of jp-store, in one test binary: a module per
//! area (most run the `jp-store` binary as real processes, some drive the
//! libraries), each with its own `//!` doc.
//!
//! One binary rather than one per file, since each test binary links every
//! crate of the workspace; a module keeps the name its file had as a
//! binary of its own, and its tests' names begin with it (`s3_cli::...`).
//!
//! The tests of every module share one process and run on parallel
//! threads: a test must not change what is global to the process (its
//! environment, current directory, umask or signal handlers; it sets them
//! on the child processes it starts instead), and what a module starts
//! once per process (the S3 test server of `jpstore_remote::testing`) is
//! shared by all of them.
//!
//! Run one module with `cargo test --workspace --test it s3_cli::` (with
//! `--workspace`, cargo also builds the `jp-store` binary these tests run:
//! `jpstore_tests::jp_store_bin`), one test with `... --test it
//! s3_cli::NAME -- --exact`.

mod attach_cli;
mod bad_settings_cli;
mod cli_conventions_cli;
mod conversation_cli;
mod conversation_concurrency;
mod conversation_crash;
mod conversation_recovery;
mod conversation_roundtrip;
mod copy_cli;
mod crafted_logs;
mod damaged_last_record;
mod dedup_cli;
mod examples_are_run;
mod fuzz_corpus;
mod gc_concurrency;
mod gc_damaged_logs_cli;
mod grep_cli;
mod jp_bytes_cli;
mod json_output_cli;
mod kill_recovery;
mod log_versions;
mod maintenance_concurrency;
mod maintenance_crash;
mod memory_backend;
mod module_layering;
mod ndjson_stream_cli;
mod newcomer_cli;
mod newer_formats_cli;
mod older_versions;
mod pack_limits_cli;
mod read_only_store_cli;
mod refused_input_cli;
mod removal_races;
mod s3_cli;
mod s3_config_cli;
mod s3_faults;
mod s3_gc;
mod s3_reader_races;
mod s3_story;
mod serve_browser;
mod serve_cli;
mod special_files_cli;
mod store_creation;
mod store_safety_cli;
mod untrusted_input_cli;
mod upgrade_cli;
mod user_input_cli;
mod view_compact_cli;
