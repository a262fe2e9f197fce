//! Fuzz target `record_v2`: see `jpstore_tests::fuzz_targets::record_v2`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    jpstore_tests::fuzz_targets::record_v2(data);
});
