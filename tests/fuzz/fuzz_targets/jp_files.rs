//! Fuzz target `jp_files`: see `jpstore_tests::fuzz_targets::jp_files`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    jpstore_tests::fuzz_targets::jp_files(data);
});
