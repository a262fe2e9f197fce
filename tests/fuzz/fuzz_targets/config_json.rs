//! Fuzz target `config_json`: see `jpstore_tests::fuzz_targets::config_json`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    jpstore_tests::fuzz_targets::config_json(data);
});
