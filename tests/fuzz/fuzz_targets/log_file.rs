//! Fuzz target `log_file`: see `jpstore_tests::fuzz_targets::log_file`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    jpstore_tests::fuzz_targets::log_file(data);
});
