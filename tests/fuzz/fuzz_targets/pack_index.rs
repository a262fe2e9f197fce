//! Fuzz target `pack_index`: see `jpstore_tests::fuzz_targets::pack_index`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    jpstore_tests::fuzz_targets::pack_index(data);
});
