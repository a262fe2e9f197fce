//! Fuzz target `head_file`: see `jpstore_tests::fuzz_targets::head_file`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    jpstore_tests::fuzz_targets::head_file(data);
});
