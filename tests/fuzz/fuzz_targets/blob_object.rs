//! Fuzz target `blob_object`: see `jpstore_tests::fuzz_targets::blob_object`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    jpstore_tests::fuzz_targets::blob_object(data);
});
