//! Fuzz target `config_toml`: see `jpstore_tests::fuzz_targets::config_toml`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    jpstore_tests::fuzz_targets::config_toml(data);
});
