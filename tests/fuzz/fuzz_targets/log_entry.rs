//! Fuzz target `log_entry`: see `jpstore_tests::fuzz_targets::log_entry`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    jpstore_tests::fuzz_targets::log_entry(data);
});
